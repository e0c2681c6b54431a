"""The main window and the app around it: start-up, menus, docks, device, settings, Export View."""
