#include "bed_cas.h"

#include <gtest/gtest.h>

#include <ctime>

#include "slurm/local_cluster_internal.h"

namespace bmas::testbed {

using slurm::internal::WriteFile;

Result<BedCas> BedCas::Make(const std::string& dir) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  BedCas cas;
  cas.dir = dir;
  auto ca = cluster::MakeClusterCa("netbed", now);
  if (!ca) return ca.error();
  cas.ca = std::move(*ca);
  auto other = cluster::MakeClusterCa("impostor", now);
  if (!other) return other.error();
  cas.impostor = std::move(*other);
  cas.ca_file = dir + "/ca.crt";
  if (auto ok = WriteFile(cas.ca_file, cas.ca.cert_pem, 0644); !ok) return ok.error();
  return cas;
}

std::pair<std::string, std::string> BedCas::Issue(const cluster::CertAndKey& from,
                                                  const cluster::NodeIdentity& who,
                                                  const std::string& name) const {
  auto issued = cluster::IssueNodeCertificate(from, who, static_cast<int64_t>(std::time(nullptr)));
  EXPECT_TRUE(issued) << issued.error().message;
  const std::string cert = dir + "/" + name + ".crt";
  const std::string key = dir + "/" + name + ".key";
  EXPECT_TRUE(WriteFile(cert, issued ? issued->cert_pem : "", 0644));
  EXPECT_TRUE(WriteFile(key, issued ? issued->key_pem : "", 0600));
  return {cert, key};
}

}  // namespace bmas::testbed
