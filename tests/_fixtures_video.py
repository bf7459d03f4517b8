"""Fixtures that encode real videos with PyAV (H.264/VP9/AV1, short and long) and corrupt variants."""
