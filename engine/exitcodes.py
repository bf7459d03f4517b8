"""Exit codes of every `capeval` command (documented in the README; scripts and cluster jobs branch on them)."""

OK = 0  # everything asked for was done
INTERNAL = 1  # an unexpected error (a bug): the traceback is shown with --debug
USAGE = 2  # usage or input errors: bad options, invalid sweep/config files, unreadable or malformed inputs
FAILURES = 3  # completed, but the share of items without a verdict (retryable failures) exceeds --max-failure-share
ABORTED = 4  # stopped early: authentication refused (HTTP 401/403), a lock held by another process, disk full
PENDING = 75  # batch judges: batches submitted and not finished yet (`sweep --no-wait`); the same command collects
INTERRUPTED = 130  # Ctrl-C: finished work is kept and a rerun resumes
TERMINATED = 143  # SIGTERM (a scheduler's time limit, `kill`): like Ctrl-C, finished work is kept and a rerun resumes
