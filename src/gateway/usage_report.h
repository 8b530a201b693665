#pragma once

// What GET /v1/usage answers: the caller's own usage and limits, as JSON. Pure.

#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace bmas::gateway {

// {"object":"usage","user","since","requests","prompt_tokens","completion_tokens",
//  "total_tokens","models":[{"model",...counts}],"limits":{"weight","rpm","tpm",
//  "tokens_per_day","max_concurrent"}}. `rows` are `user`'s; they are summed per model (which
// backend served them is operator data, left out). An unset limit is null.
std::string UsageReportJson(const std::string& user, int64_t since_unix,
                            const std::vector<UsageRow>& rows, const UserLimits& limits);

}  // namespace bmas::gateway
