#pragma once
// Deliberate faults, for testing that the checks meant to catch a broken layout do catch one
// (colossal verify's tests run a layout with a fault and expect it named). Off unless
//   COLOSSAL_INJECT_FAULT=NAME[,NAME...]
// is set; a name this build does not know is an error, so a typo cannot pass for a clean run.
// Faults:
//   average_over_sequence_parallel   gradients averaged over dp x sp instead of summed over sp
//                                    and averaged over dp (the classic sequence-parallel bug:
//                                    every gradient 1/sp of what it should be, the loss unchanged)
//   nan_loss                         the training loop's loss of step 2 turned NaN (its guard must
//                                    stop the run before the optimizer step and any checkpoint)
namespace colossal {

/// Whether fault `name` (one of the list above) is switched on for this process.
bool fault_injected(const char* name);
/// Reads COLOSSAL_INJECT_FAULT now (dist::init does), so a name this build does not know stops
/// the job at start-up rather than at the first place a fault could apply.
void check_injected_faults();

}  // namespace colossal
