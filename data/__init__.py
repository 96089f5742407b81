"""Data: generated SCAN and its TFDS builder, user files, vocabularies."""
