"""The local demo: every Voice Stack part on loopback, one spoken request through HA's Assist."""
