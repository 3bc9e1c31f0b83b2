"""``summeval-run``'s exit codes, in one place (``--help`` and the README state them)."""

EXIT_OK = 0  # the run completed
EXIT_FAILED = 1  # too many errors, nothing scored, a refused key, an unreachable judge or agent
EXIT_BAD_INPUT = 2  # bad config or input, found before any judge call
EXIT_NOT_RECORDED = 3  # a write in the run directory failed (RunRecordError): a full disk
EXIT_BUDGET = 4  # the next call would have passed runner.max_cost or runner.max_tokens
