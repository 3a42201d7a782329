"""One module per framework; each offers the same small interface (see ``floor``)."""
