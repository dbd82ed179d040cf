"""Stages shared by two or more recipes; each differs between recipes only in its template and settings."""
