// objects: to be written
