"""``frota provision``: a fleet's trust material (CA, keys, broker configuration, credentials)."""
