"""One image across several ranks (issue 14 part b): the ranks of an initialised torch.distributed process group
each call the same sampler with the same inputs and `parallel` = the group's size; the transformer's work of a step
is shared out, and every rank ends each step with the same latents (so rank 0's result is the result).

- `context`: Ulysses context parallelism (diffusers' own) for FLUX.1 Fill and FLUX.2 [klein]: the image and text
  tokens split across the ranks, the attention heads after each all-to-all; `valid_degrees` / `check_degree`
  (1, 2, 4, 8 dividing the head count), `check_parallel` (degree, token counts, the group), `rank_shapes` (what a
  rank holds), `context_parallel(model, degree)` (the hooks on for a block, off after), `forward_context_parallel`
  (one forward: a rank function).
- `cfg`: CFG parallelism for SD3 + ControlNet: rank 0 the conditional pass, rank 1 the unconditional one, the two
  velocities all-gathered and guided as on one rank.
- `launch`: `run_on_ranks(fn, world_size, *args)`: local ranks (spawned processes, gloo, 127.0.0.1) calling
  `fn(*args)`; rank 0's result. Ray actors take its place later; the rank functions do not change.

How the samplers use it: `sample_flux_fill(..., parallel=d)` and `sample_klein(..., parallel=d)` check the degree
against the transformer's heads and the token counts and the group's size before anything runs, then run their
step loop inside `context_parallel(model, d)`; everything around the transformer call (noise, schedule, Euler step,
re-blends) runs whole on every rank, on identical tensors. `sample_sd3_controlnet_inpaint(..., parallel=2)` builds
only its rank's CFG pass and all-gathers the velocity before guiding. parallel=1, the default, is the single-process
path untouched (no check, no hook: the same result bit for bit).
"""
