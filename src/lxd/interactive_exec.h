#pragma once

// A command in an LXD instance wired to the caller's descriptors through LXD's exec websockets
// (over the same unix socket as the REST API). On a terminal: a pty, its bytes both ways on the
// data socket, window sizes on the control socket. Otherwise: pipes, one socket for each of
// stdin, stdout and stderr, so the command sees the end of its input. What `lxc exec` does,
// without `lxc`.

#include <string>

#include "common/result.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd {

// Runs `spec.command` on a pty in instance `name` of the LXD at `socket`, relaying `in_fd` to
// it and its output to `out_fd` until it ends. When `in_fd` is a terminal it is put in raw
// mode for the while (and restored), and its size follows SIGWINCH. Returns the exit code.
Result<int> RunInteractive(LxdApi& client, const std::string& socket, const std::string& name,
                           const ExecSpec& spec, int in_fd, int out_fd);

// Runs `spec.command` in instance `name` with pipes for its stdio: `in_fd` relayed to its stdin
// up to its end (then closed), its stdout to `out_fd` and its stderr to `err_fd`. For input
// that is not a terminal, which a pty would never pass an end of. Returns the exit code.
Result<int> RunPiped(LxdApi& client, const std::string& socket, const std::string& name,
                     const ExecSpec& spec, int in_fd, int out_fd, int err_fd);

}  // namespace bmas::lxd
