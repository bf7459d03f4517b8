"""Session fixtures for vLLM: tiny random-weight models built by the suite, engines shared across tests."""
