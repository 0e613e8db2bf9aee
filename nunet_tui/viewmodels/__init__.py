"""What widgets and screens show, as plain data: no Textual, no engine calls.

Widgets take these as attributes and post messages up; screens and the app build them from
the engine's replies. Kept outside nunet_tui/screens so a widget never imports a screen.
"""
