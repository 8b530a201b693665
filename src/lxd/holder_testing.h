#pragma once

// For tests of who holds a file: a child process that takes hold of it and waits.

#include <sys/types.h>
#include <unistd.h>

namespace bmas::lxd::testing {

// Forks a child that runs `hold(path)` (system calls only: the parent may have threads), says so
// on a pipe and then waits to be killed. Returns its pid once it holds; -1 when it did not say.
inline pid_t StartHolder(void (*hold)(const char* path), const char* path) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    hold(path);
    [[maybe_unused]] ssize_t w = write(ready[1], "x", 1);
    for (;;) pause();
  }
  close(ready[1]);
  char byte;
  const bool held = child > 0 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  return held ? child : -1;
}

}  // namespace bmas::lxd::testing
