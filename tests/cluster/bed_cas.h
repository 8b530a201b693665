#pragma once

// The certificate authorities of the TLS bed tests that start parts by hand rather than through
// `bmas cluster init`: the cluster's, and an impostor's for the refusals.

#include <string>
#include <utility>

#include "cluster/cluster_ca.h"
#include "common/result.h"

namespace bmas::testbed {

struct BedCas {
  cluster::CertAndKey ca;        // the cluster's
  cluster::CertAndKey impostor;  // someone else's, for certificates that must be refused
  std::string dir;
  std::string ca_file;  // <dir>/ca.crt: the cluster CA's certificate, 0644

  // Both CAs, made now, with the cluster's certificate written to <dir>/ca.crt.
  static Result<BedCas> Make(const std::string& dir);

  // A certificate and key for `who` from `from` (ca or impostor), written as <dir>/<name>.crt
  // (0644) and <name>.key (0600); their paths. A failure fails the test.
  std::pair<std::string, std::string> Issue(const cluster::CertAndKey& from,
                                            const cluster::NodeIdentity& who,
                                            const std::string& name) const;
};

}  // namespace bmas::testbed
