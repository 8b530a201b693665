// For bench/gateway_callgrind.py only: valgrind 3.19 does not know openat2 (syscall 437), which
// bmas opens its state directory with. Preloaded into the gateway under valgrind, this maps it to
// openat with the same flags and mode (the resolve flags are dropped: a measurement on a
// throw-away state directory, never a deployment).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/syscall.h>

struct open_how_v0 {
  uint64_t flags, mode, resolve;
};

long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == 437) {
    const struct open_how_v0* how = (const struct open_how_v0*)a[2];
    return openat((int)a[0], (const char*)a[1], (int)how->flags, (mode_t)how->mode);
  }
  static long (*next)(long, ...);
  if (!next) next = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return next(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
