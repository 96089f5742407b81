"""The sums behind the kernelised and gated kinds, apart from the kinds: kernel_sums (the O(L) linear-attention
sums and the paths that compute them: chunked_sums' custom VJP, linear_pallas's kernels, the gated scans),
delta_sums (the delta rule's chunked solves) and chunking (the causal chunk length per platform)."""
