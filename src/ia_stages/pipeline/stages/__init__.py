"""Pipeline stages: read stores, call the library, write stores. One module per stage."""
