"""Two runs of one job side by side, boundary by boundary (issue 25): `capture` records what a run observed,
`metrics` measures the difference of two tensors and two images, `diff` lines two captures up and finds the first
boundary that diverges, `spec` and `runs` define and execute the runs, `variants` makes a run's copy of its
components (dtype, fp8 storage, attention), `diffusers_runs` runs diffusers' own pipelines under FillScope's names,
`record` writes the JSON record and `page` its HTML report page."""
