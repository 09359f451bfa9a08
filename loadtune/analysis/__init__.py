"""Pure functions of results: statistics, the recommendation, the bound, memory, comparisons, the
check's verdict. No processes, no clocks: testable with hand-made results."""
