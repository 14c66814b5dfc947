"""The service store: which class answers to which service name in this worker.

Registration replaces a class atomically (one dict assignment), so calls already running keep
their old class while new calls get the new one. The store also remembers which module each
service came from, so a module that is redeployed without a class it used to define leaves that
older service in place (as in Zato: only ``undeploy`` removes a service).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType

from runtime.errors import InvalidService, ServiceNotFound
from runtime.service.base import Service


@dataclass(frozen=True)
class ServiceInfo:
    """What the store knows of one deployed service."""

    name: str
    service_class: type[Service]
    module_name: str
    source_file: str
    deployed_at: datetime


class ServiceStore:
    """Registry of deployed services, by name and by class."""

    def __init__(self) -> None:
        self._by_name: dict[str, ServiceInfo] = {}
        self._by_class: dict[type[Service], str] = {}

    def services_in_module(self, module: ModuleType) -> list[type[Service]]:
        """Service subclasses defined in this module itself, in source order.

        Private classes (``_Name``) and abstract bases (``__abstract__ = True`` in their own body)
        are left out.
        """
        found = []
        for _, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, Service) and obj is not Service
                    and obj.__module__ == module.__name__ and not obj.__name__.startswith('_')
                    and not inspect.isabstract(obj)
                    # Only the class's own marker counts: subclasses of an abstract base are concrete.
                    and obj.__dict__.get('__abstract__') is not True):
                found.append(obj)
        return found

    def prepare_module(self, module: ModuleType, module_name: str) -> list[type[Service]]:
        """Validate every service class of a module without registering any of them."""
        classes = self.services_in_module(module)
        names: dict[str, str] = {}
        for cls in classes:
            cls._prepare(module_name)
            if cls.name in names:
                raise InvalidService(cls.__qualname__, f'name {cls.name!r} is also used by {names[cls.name]}')
            names[cls.name] = cls.__qualname__
        return classes

    def register_all(self, classes: list[type[Service]], module_name: str, source_file: str) -> list[str]:
        """Register already prepared classes, replacing older versions; returns their names."""
        now = datetime.now(UTC)
        for cls in classes:
            old = self._by_name.get(cls.name)
            if old is not None:
                self._by_class.pop(old.service_class, None)
            self._by_name[cls.name] = ServiceInfo(cls.name, cls, module_name, source_file, now)
            self._by_class[cls] = cls.name
        return [cls.name for cls in classes]

    def register(self, cls: type[Service], module_name: str = '', source_file: str = '') -> str:
        """Validate and register a single class (used by tests and built-ins)."""
        module_name = module_name or cls.__module__.rsplit('.', 1)[-1]
        cls._prepare(module_name)
        return self.register_all([cls], module_name, source_file)[0]

    def unregister(self, name: str) -> None:
        """Remove a service; raises ServiceNotFound if it is not deployed."""
        info = self._by_name.pop(name, None)
        if info is None:
            raise ServiceNotFound(name)
        self._by_class.pop(info.service_class, None)

    def get(self, name_or_class: str | type[Service]) -> type[Service]:
        """The class deployed under a name (or the class itself, if it is deployed)."""
        if isinstance(name_or_class, str):
            info = self._by_name.get(name_or_class)
            if info is None:
                raise ServiceNotFound(name_or_class)
            return info.service_class
        if name_or_class in self._by_class:
            return name_or_class
        name = getattr(name_or_class, 'name', '') or getattr(name_or_class, '__name__', repr(name_or_class))
        raise ServiceNotFound(name)

    def info(self, name: str) -> ServiceInfo:
        """Details of one deployed service."""
        try:
            return self._by_name[name]
        except KeyError:
            raise ServiceNotFound(name) from None

    def has(self, name: str) -> bool:
        """Whether a service of this name is deployed."""
        return name in self._by_name

    def names(self) -> list[str]:
        """Every deployed service name, sorted."""
        return sorted(self._by_name)

    def list(self) -> list[ServiceInfo]:
        """Every deployed service, sorted by name."""
        return [self._by_name[n] for n in sorted(self._by_name)]
