"""Custom algorithm classes the config tests point at (never run, only resolved)."""


class DemoTuner:
    def __init__(self, optimize_mode: str = "maximize", seed: int = 0) -> None:
        self.optimize_mode = optimize_mode
        self.seed = seed


class DemoAssessor:
    def __init__(self, patience: int = 1) -> None:
        self.patience = patience
