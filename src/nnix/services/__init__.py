"""Training-service building blocks: GPU inventory and scheduling, process management, environments."""
