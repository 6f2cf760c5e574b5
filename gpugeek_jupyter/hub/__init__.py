"""JupyterHub's side of a team: the team's ledger service (:mod:`.ledger_service`)."""
