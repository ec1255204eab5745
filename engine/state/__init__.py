"""The session state: its records, the events that change it, and the one reducer that folds them."""
