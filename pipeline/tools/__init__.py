"""Tools run on a finished dataset: verify, the HTML report, Flex Template metadata."""
