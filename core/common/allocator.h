#pragma once
// Keeping freed memory in the process for the next training step.
//
// glibc's malloc serves every block of 32 MiB or more with its own mmap and gives it back to the
// kernel when it is freed; smaller ones come from heaps it trims. A training step frees and asks
// again for the same large buffers every step (the logits, the embedding's and the head's
// gradients, activations), so each step takes fresh pages that the kernel faults in and zeroes
// one 4 KiB page at a time: on the LLaMA S shape about 19k faults (75 MB) per step, 7-13% of the
// step on the 2-core development machine (bench_llama). With mmap off and trimming off, freed
// blocks stay in the heap and step 2 onward reuses step 1's pages; the process keeps its peak
// footprint, which a training step reaches again anyway.
//
// dist::init() calls it. COLOSSAL_KEEP_FREED_MEMORY=0 leaves malloc as it was; a MALLOC_*
// variable or a preloaded allocator (jemalloc, tcmalloc) means the user chose: also left alone.
namespace colossal {

/// Applies the settings above once per process; returns whether they are in effect.
bool keep_freed_memory();

}  // namespace colossal
