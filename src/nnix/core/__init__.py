"""The experiment core: events, the state fold, the manager loop."""
