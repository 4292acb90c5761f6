from hypothesis import settings
settings.register_profile("stress", max_examples=3000, deadline=None)
settings.load_profile("stress")
