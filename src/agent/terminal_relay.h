#pragma once

// The client side of a workspace terminal (`bmas workspace shell` on a terminal): the agent
// makes a terminal inside the workspace and hands its master back; this process puts its own
// terminal in raw mode and copies bytes both ways, passes window size changes on (SIGWINCH),
// and restores its terminal however the session ends.

#include <optional>

namespace bmas {

// The caller's terminal size (rows, columns) on `fd`, when it is a terminal with a size.
struct TerminalSize {
  int rows = 0;
  int cols = 0;
};
std::optional<TerminalSize> SizeOf(int fd);

// Relays stdin to `master` and `master` to stdout until `done_fd` (the agent's connection)
// becomes readable, or hangs up, then drains what the shell wrote last, and returns 0: the
// caller reads the exit code from `done_fd`. A SIGTERM, SIGHUP, SIGINT or SIGQUIT sent to this
// process ends the relay too, and its number is returned: the caller closes `done_fd`, which
// ends the session. Closes nothing.
int RelayTerminal(int master, int done_fd);

}  // namespace bmas
