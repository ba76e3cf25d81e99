"""(being layered: see titan_doctor/migrate/__init__.py)"""
