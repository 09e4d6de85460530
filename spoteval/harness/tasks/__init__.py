"""Small tasks shipped with spot-eval, one per harness, for the drill and the tests (no hub download).

- `inspect_tiny.py@spoteval_tiny` (inspect-ai): ten questions from `inspect_tiny.jsonl`, ids with
  `/` and spaces, scored by `exact()`.
- `lm_eval/tiny.yaml`, task `spoteval_tiny` (lm-eval, `include_path` = `spoteval/harness/tasks/lm_eval`):
  the same ten questions from `lm_eval/tiny.jsonl`, `generate_until`, scored by `exact_match`.

Against the stand-in model server (spoteval/standin.py) six of the ten are answered right in each
harness: their targets are the stand-in's deterministic answers to the prompt as each harness sends it.
"""
