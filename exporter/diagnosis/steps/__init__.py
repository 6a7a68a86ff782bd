"""The chain's steps, one module each, in the field guides' order: symptom, network, engine,
gpu, host, application. Each is one shape: ``evaluate(case: Case) -> Outcome`` (``base.py``);
``chain`` runs them in order, attributes their findings and renders the verdicts."""
