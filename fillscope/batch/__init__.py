"""Batches: a JSON-lines manifest of inpainting jobs run without ComfyUI (`python -m fillscope batch MANIFEST
--out DIR`).

- `manifest`: one `Job` a line, every line checked before anything runs (`read_manifest`); a job's key (`job_key`:
  its line and the fingerprint of the files it names), what decides that a rerun may skip it;
- `images`: the image and mask files read as ComfyUI's image loaders read them (float32 0..1, mask 1 = repaint);
- `runner`: `ModelCache` (stacks resident between jobs, least recently used dropped first), `run_job` (one job:
  prepare, the family's `run`, paste-back, DIR/<id>.png and DIR/<id>.shapes.json written atomically) and
  `run_batch` (in-process, one job after the other, DIR/batch.jsonl, reruns skip finished jobs); a job with
  `tiles` runs through tiled.run_tiled, its tile records in its result;
- `cluster`: the same jobs on Ray workers (models resident, the driver the one writer, every wait timed out);
- `tiles`: a tiled job's tiles spread over the Ray workers (the driver plans, blends and pastes back);
- `reach`: joining a cluster's address within a timeout.

`run_job` is self-contained (a `Job` is a plain dataclass, the cache belongs to the caller), so another runner can
hold a `ModelCache` per worker and call it for the jobs it receives; the outputs are the same bit for bit.
"""
