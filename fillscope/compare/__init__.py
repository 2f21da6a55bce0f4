"""Two runs of one job side by side, boundary by boundary (issue 25): `capture` records what a run observed,
`metrics` measures the difference of two tensors and two images, `diff` lines two captures up and finds the first
boundary that diverges, `spec` and `runs` define and execute the runs, `record` writes the JSON record."""
