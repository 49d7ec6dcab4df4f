"""File I/O, local and gs:// behind one interface, with read-ahead."""
