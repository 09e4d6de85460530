"""The node agent: runs on the GPU node and turns it into an operated run.

It starts the model server, runs the run's episodes as subprocesses, writes every ended attempt,
every final result and every start, notice, heartbeat and stop to the run record in object
storage (through `spoteval.record` and `spoteval.store`), and stops the node by its stop rules.
Standard library and obstore only, Python >= 3.10. Entry point: `python -m spoteval.agent`.
"""
