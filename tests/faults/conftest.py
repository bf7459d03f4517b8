"""The fault suite's fixtures; helpers live in _faults_support.py, which the tests import by that unique name (a
bare `from conftest import ...` resolves to whichever folder's conftest pytest imported first)."""

from _faults_support import *  # noqa: F401,F403 - fixtures must be attributes of this module
