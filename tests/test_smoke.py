def test_server_answers_health_and_demo_ping(server):
    assert server.request('GET', '/health').json()['is_ok'] is True
    assert server.invoke('conduit.ping')['pong'] is True
