"""The studio: `cadenza serve`, a local web page and JSON API to generate, hear, see and continue music."""
