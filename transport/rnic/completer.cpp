// completer: to be written
