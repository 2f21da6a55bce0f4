"""Errors a user can act on: each names the input at fault and the fix."""


class FillScopeInputError(ValueError):
    """Bad input from the user (wrong file, wrong size, wrong model). The message says which input and how to
    fix it; ComfyUI shows it in the prompt's status and the server keeps running."""

    def __init__(self, input_name: str, problem: str, fix: str):
        self.input_name = input_name
        self.problem = problem
        self.fix = fix
        super().__init__(f"[FillScope] input '{input_name}': {problem} Fix: {fix}")
