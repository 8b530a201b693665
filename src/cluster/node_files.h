#pragma once

// The files `bmas node join` puts on a node, each replaced atomically (a temporary file in the
// same directory, fsync, owner and mode, rename), with what was there before kept so that a
// failed join can put it back. Root writes them into root-owned directories only: a directory
// on the way that is a symlink, or that another account may write, is refused
// (../shared/SECURITY.md).

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace bmas::cluster {

struct NodeFile {
  std::string path;  // absolute
  std::string contents;
  mode_t mode = 0644;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The files of one join, put in order and undone in reverse.
class FileInstall {
 public:
  FileInstall() = default;
  FileInstall(const FileInstall&) = delete;
  FileInstall& operator=(const FileInstall&) = delete;

  // Puts `file` in place, creating its directory (0755, root's) when absent. False when the
  // file was already there with these contents, owner and mode (nothing done). Errors name the
  // file and why.
  Result<bool> Put(const NodeFile& file);

  // Puts back what each Put replaced (or removes what it created), newest first; directories
  // it created are removed when empty.
  void Undo();

  // Whether some Put changed something.
  bool changed() const { return !done_.empty(); }

 private:
  struct Done {
    std::string path;
    std::optional<NodeFile> before;  // nullopt: the file did not exist
  };
  std::vector<Done> done_;
  std::vector<std::string> made_dirs_;
};

// Creates `file` when nothing is at its path (never replacing one: a key that exists is kept).
// True when it made it. Its directory must exist and be root's alone.
Result<bool> CreateIfAbsent(const NodeFile& file);

// The regular file at `path` as it is (not following a link in its last component); nullopt
// when it does not exist.
Result<std::optional<NodeFile>> ReadNodeFile(const std::string& path);

}  // namespace bmas::cluster
