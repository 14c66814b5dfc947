"""Demo CRM flow: create and read customers; a new customer is welcomed through pub/sub.

Customers live in this worker's memory (the demo runs one worker); a real flow would store them
in its own system of record.
"""

import itertools

from runtime import Service

_ids = itertools.count(1)
_customers = {}


class CreateCustomer(Service):
    """Creates a customer and answers with its id."""

    name = 'crm.customer.create'
    input = 'name', 'email', '-phone'
    output = 'customer_id',

    def handle(self):
        if '@' not in self.request.input.email:
            self.response.status_code = 400
            self.response.payload = {'customer_id': None, 'error': 'email must contain @'}
            return
        customer = self.invoke('crm.customer.store', dict(self.request.input))
        # Durable and asynchronous: the welcome runs after this answer, and again if it fails.
        self.publish('crm.customer.welcome', {'customer_id': customer['id']})
        self.response.status_code = 201
        self.response.payload = {'customer_id': customer['id']}


class StoreCustomer(Service):
    """Keeps a customer record (in memory, for the demo)."""

    name = 'crm.customer.store'

    def handle(self):
        customer = dict(self.request.payload, id=next(_ids))
        _customers[customer['id']] = customer
        self.response.payload = customer


class WelcomeCustomer(Service):
    """Receives a message for each new customer (published to this service) and marks it welcomed."""

    name = 'crm.customer.welcome'

    def handle(self):
        customer = _customers.get(self.request.payload['customer_id'])
        if customer is not None:
            customer['welcomed'] = True
            self.logger.info('welcomed customer %s (msg %s, attempt %s)', customer['id'],
                             self.request.raw_request['msg_id'], self.request.raw_request['delivery_count'])


class GetCustomer(Service):
    """Returns one customer by id."""

    name = 'crm.customer.get'
    input = 'customer_id',

    def handle(self):
        try:
            customer = _customers.get(int(self.request.input.customer_id))
        except ValueError:
            customer = None
        if customer is None:
            self.response.status_code = 404
            self.response.payload = {'error': f'no customer {self.request.input.customer_id}'}
        else:
            self.response.payload = customer
