"""Sweeps: sweep files (`config`), grid expansion (`grid`), datasets (`datasets`) and the runner (`runner`)."""
