// The date that benchmark reports and tuning entries carry.
#pragma once

#include <string>

namespace kfuse::rt {

// The current time, UTC, ISO 8601: "2026-11-23T13:00:00Z".
std::string utc_now();

} // namespace kfuse::rt
