"""The operator's year: backups and restores of a home, upgrades of its schema, and the checks of what lies on
disk (release files against their manifests, file modes)."""
