#pragma once
// Who this process is, for messages: the global rank once core/dist has initialised, before
// that the RANK variable a launcher set, else "0" (a world of one).
#include <string>

namespace colossal {

/// Rank used in log prefixes and COLOSSAL_CHECK messages.
int process_rank();
std::string process_rank_string();

/// Called by dist::init() once the rank is known.
void set_process_rank(int rank);

}  // namespace colossal
