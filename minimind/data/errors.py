"""The one error type of the data package."""


class DataError(ValueError):
    """A corpus or tokenizer that cannot be prepared; the message names the corpus."""
