"""``dmg-domainbed data check`` (:mod:`.data_check`): is a copy of a dataset what DomainBed reads,
image by image? Each finding says what was found, what DomainBed expects and how to fix it."""
