#pragma once

// An interactive command in an LXD instance, wired to the caller's terminal through LXD's exec
// websockets (over the same unix socket as the REST API): the pty's bytes both ways on the
// data socket, window sizes on the control socket. What `lxc exec` does, without `lxc`.

#include <string>

#include "common/result.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd {

// Runs `spec.command` on a pty in instance `name` of the LXD at `socket`, relaying `in_fd` to
// it and its output to `out_fd` until it ends. When `in_fd` is a terminal it is put in raw
// mode for the while (and restored), and its size follows SIGWINCH. Returns the exit code.
Result<int> RunInteractive(LxdClient& client, const std::string& socket, const std::string& name,
                           const ExecSpec& spec, int in_fd, int out_fd);

}  // namespace bmas::lxd
