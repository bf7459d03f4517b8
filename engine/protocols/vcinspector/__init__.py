from .codes import *  # noqa: F401,F403
