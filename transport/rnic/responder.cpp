// responder: to be written
