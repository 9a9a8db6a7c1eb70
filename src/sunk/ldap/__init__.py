"""Reading people and groups from an LDAP directory (OpenLDAP, Active Directory, any
LDAP-speaking identity provider): the adapter knows LDAP, not what sunk does with them."""
