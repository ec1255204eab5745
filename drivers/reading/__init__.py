"""Reading stored sessions: views, lists and pages, stats, and their JSON forms."""
