"""``python -m summeval_runner``: the same app as ``summeval-run``."""

from summeval_runner._cli._app import main

if __name__ == "__main__":
    main()
