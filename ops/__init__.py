"""Scripts a person runs: the embedded dev stack, the test runner's services, benchmarks."""
