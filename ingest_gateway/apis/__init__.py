"""The Kafka APIs: the request router (frames to handlers, the API-version table) and one
module per API family, with the authorization they share."""
